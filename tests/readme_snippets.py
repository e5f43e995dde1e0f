"""The README's code blocks, as the README tests and the wheel test run them."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A log line of TF, TFF, gRPC or absl: TF's C++ format, absl's (C++ and
# Python), Python logging's default one, and absl's C++ preamble.
LOG_LINE = re.compile(
    r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] '
    r'|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ '
    r'|(DEBUG|INFO|WARNING|ERROR):(absl|tensorflow|tensorflow_federated):'
    r'|WARNING: All log messages before absl::InitializeLog)',
    re.M,
)


def user_env() -> dict:
  """This process's environment as a user's shell has it: no log settings."""
  return {
      k: v
      for k, v in os.environ.items()
      if k not in ('TF_CPP_MIN_LOG_LEVEL', 'GRPC_VERBOSITY', 'TFF_PRIV_VERBOSE')
  }


def log_lines(stderr: str) -> list:
  """The lines of `stderr` that are TF's, TFF's, gRPC's or absl's logs."""
  return [line for line in stderr.splitlines() if LOG_LINE.match(line)]


def readme() -> str:
  with open(os.path.join(ROOT, 'README.md')) as f:
    return f.read()


def code_after(heading: str) -> str:
  """The first python block after `heading`."""
  text = readme()
  section = text[text.index(heading) :]
  return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def claimed_after(heading: str) -> str:
  """What the README says the block after `heading` prints (`It prints ...`)."""
  text = readme()
  return re.search(r'It prints `([^`]+)`', text[text.index(heading) :]).group(1)


def quickstart_code() -> str:
  return code_after('## Quickstart')
