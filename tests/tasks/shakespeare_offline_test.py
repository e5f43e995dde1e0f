"""Tests for tasks.shakespeare_offline: parsing, clients, split, vocabulary."""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_priv_tasks import shakespeare_offline

_PLAY = r"""# The Test Play

## ACT I

### SCENE I. A heath.

_Thunder. Enter First Witch and
MACBETH_

**First Witch**  
When shall we meet again  
In thunder\--or in rain?

**MACBETH**  
__\[Aside]_  
So foul and fair a day — I have not seen.

_Exit First Witch_

Who comes here?

**FIRST WITCH**  
[Within]_  
All hail!  
*[She vanishes.]*

*Enter Banquo, and
Lennox.*

**BANQUO**  
_Exeunt_

## ACT II

Stray text with no speaker.

**Banquo**  
Good sir, why do you start?
"""  # noqa: W291 (Markdown line breaks)


def _stream(snippet):
  """TFF's token stream of one snippet: BOS, characters, EOS."""
  return (
      [shakespeare_offline.BOS]
      + shakespeare_offline.encode(snippet)
      + [shakespeare_offline.EOS]
  )


class ParseTest(tf.test.TestCase):

  def test_parse_play(self):
    self.assertEqual(
        shakespeare_offline.parse_play(_PLAY),
        [
            (
                'FIRST WITCH',
                'When shall we meet again\nIn thunder--or in rain?',
            ),
            (
                'MACBETH',
                'So foul and fair a day -- I have not seen.\nWho comes here?',
            ),
            ('FIRST WITCH', 'All hail!'),
            ('BANQUO', 'Good sir, why do you start?'),
        ],
    )

  def test_client_id(self):
    self.assertEqual(
        shakespeare_offline.client_id('macbeth', 'First Witch'),
        'MACBETH_FIRST_WITCH',
    )
    self.assertEqual(
        shakespeare_offline.client_id('a-midsummer-night-s-dream', "PUCK's"),
        'A_MIDSUMMER_NIGHT_S_DREAM_PUCK_S',
    )

  def test_split_speeches(self):
    speeches = tuple('abcdefghij')
    self.assertEqual(
        shakespeare_offline.split_speeches(speeches, 0.2),
        (tuple('abcdefgh'), tuple('ij')),
    )
    # At least one speech on each side.
    self.assertEqual(
        shakespeare_offline.split_speeches(('a', 'b'), 0.01), (('a',), ('b',))
    )
    self.assertEqual(
        shakespeare_offline.split_speeches(('a', 'b'), 0.99), (('a',), ('b',))
    )


class PackagedPlaysTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.clients = shakespeare_offline.client_speeches()
    cls.train, cls.test = shakespeare_offline.load_data()

  def test_at_least_500_clients_none_empty(self):
    self.assertGreaterEqual(len(self.clients), 500)
    self.assertEqual(self.train.client_ids, self.test.client_ids)
    self.assertCountEqual(self.train.client_ids, list(self.clients))
    for speeches in self.clients.values():
      self.assertGreaterEqual(len(speeches), 2)
      for speech in speeches:
        self.assertNotEmpty(speech.strip())

  def test_train_then_test_is_the_role_in_play_order(self):
    for cid in ('MACBETH_MACBETH', 'HAMLET_HAMLET', 'THE_TEMPEST_MIRANDA'):
      train = [
          e['snippets'].decode()
          for e in self.train.create_tf_dataset_for_client(
              cid
          ).as_numpy_iterator()
      ]
      test = [
          e['snippets'].decode()
          for e in self.test.create_tf_dataset_for_client(
              cid
          ).as_numpy_iterator()
      ]
      self.assertNotEmpty(train)
      self.assertNotEmpty(test)
      self.assertEqual(tuple(train + test), self.clients[cid])
      self.assertEqual(len(test), round(0.2 * len(self.clients[cid])))

  def test_known_text_of_the_plays(self):
    # Macbeth I.1 and I.2: facts of the play, not of the parser.
    self.assertEqual(
        self.clients['MACBETH_FIRST_WITCH'][0],
        'When shall we three meet again\nIn thunder, lightning, or in rain?',
    )
    self.assertEqual(
        self.clients['MACBETH_DUNCAN'][0],
        'What bloody man is that? He can report,\n'
        'As seemeth by his plight, of the revolt\nThe newest state.',
    )
    # Edward III's *...* stage directions are not speech.
    for speech in self.clients['EDWARD_III_KING_EDWARD']:
      self.assertNotIn('*', speech)
      self.assertNotIn('Exeunt', speech)

  def test_no_markup_and_no_out_of_vocabulary_characters(self):
    text = ''.join(''.join(s) for s in self.clients.values())
    self.assertEmpty(set(text) - set(shakespeare_offline.CHAR_VOCAB))
    for markup in ('**', '\\', '_[', '#'):
      self.assertNotIn(markup, text)

  def test_encode_decode_round_trip(self):
    for speeches in list(self.clients.values())[::97]:
      for speech in speeches[:3]:
        ids = shakespeare_offline.encode(speech)
        self.assertNotIn(shakespeare_offline.OOV, ids)
        self.assertEqual(shakespeare_offline.decode(ids), speech)

  def test_encode_matches_tffs_tokenizer_in_the_task(self):
    cid = 'MACBETH_FIRST_WITCH'
    baselines = tff.simulation.baselines
    task = baselines.shakespeare.create_character_prediction_task(
        baselines.ClientSpec(num_epochs=1, batch_size=2, shuffle_buffer_size=1),
        use_synthetic_data=True,
    )
    preprocess = task.datasets.train_preprocess_fn
    x, y = next(iter(preprocess(self.train.create_tf_dataset_for_client(cid))))
    first = self.clients[cid][0]
    stream = _stream(first)
    stream += [shakespeare_offline.PAD] * (-len(stream) % 81)
    self.assertAllEqual(x[0], stream[:80])
    self.assertAllEqual(y[0], stream[1:81])
    self.assertEqual(shakespeare_offline.decode(x[0].numpy()), first)

  def test_decode_specials_and_oov(self):
    self.assertEqual(shakespeare_offline.encode('é'), [shakespeare_offline.OOV])
    self.assertEqual(
        shakespeare_offline.decode([shakespeare_offline.BOS, 1, 0, 0]),
        shakespeare_offline.CHAR_VOCAB[0],
    )
    with self.assertRaises(ValueError):
      shakespeare_offline.decode([1000])

  def test_max_clients_and_bad_arguments(self):
    train, test = shakespeare_offline.load_data(max_clients=7)
    self.assertLen(train.client_ids, 7)
    self.assertEqual(train.client_ids, sorted(self.clients)[:7])
    for bad in (0.0, 1.0):
      with self.assertRaisesRegex(ValueError, 'test_fraction'):
        shakespeare_offline.load_data(test_fraction=bad)
    for bad in (0, -1, 2.5, True):
      with self.assertRaisesRegex(ValueError, 'max_clients'):
        shakespeare_offline.load_data(max_clients=bad)
    del test

  def test_element_type_is_tffs(self):
    online = tff.simulation.datasets.shakespeare.get_synthetic()
    self.assertEqual(
        self.train.element_type_structure, online.element_type_structure
    )
    self.assertIsInstance(
        self.train.element_type_structure, collections.OrderedDict
    )


if __name__ == '__main__':
  tf.test.main()
