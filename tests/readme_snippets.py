"""The README's code blocks, as the README tests and the wheel test run them."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme() -> str:
  with open(os.path.join(ROOT, 'README.md')) as f:
    return f.read()


def code_after(heading: str) -> str:
  """The first python block after `heading`."""
  text = readme()
  section = text[text.index(heading):]
  return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def claimed_after(heading: str) -> str:
  """What the README says the block after `heading` prints (`It prints ...`)."""
  text = readme()
  return re.search(r'It prints `([^`]+)`', text[text.index(heading):]).group(1)


def quickstart_code() -> str:
  return code_after('## Quickstart')
