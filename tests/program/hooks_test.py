"""The evaluation hook: when it evaluates, and what it releases."""

import types

import tensorflow as tf

from tff_priv.program import hooks


class _FakeEvalProcess:
  """TFF's evaluation process, reduced to the calls the hook makes."""

  def __init__(self):
    self.evaluated = []

  def initialize(self):
    return 'state'

  def set_model_weights(self, state, weights):
    return (state, weights)

  def next(self, state, data):
    self.evaluated.append((state[1], data))
    metrics = {'loss': 0.5, 'sparse_categorical_accuracy': 0.75}
    return types.SimpleNamespace(
        metrics={'client_work': {'eval': {'current_round_metrics': metrics}}}
    )


class EvaluationTest(tf.test.TestCase):

  def _hook(self, every):
    hook = hooks.Evaluation(model_fn=None, test_data='test', every=every)
    fake = _FakeEvalProcess()
    hook.__dict__['_process'] = fake  # The cached TFF process.
    return hook, fake

  def test_every_n_rounds_and_the_last_only(self):
    hook, fake = self._hook(every=3)
    reads = []

    def weights():
      reads.append(1)
      return 'w'

    due = [
        r
        for r in range(1, 8)
        if hook.evaluate(r, weights, last=(r == 7)) is not None
    ]
    self.assertEqual(due, [3, 6, 7])
    # The model is read only for a round that is evaluated.
    self.assertLen(reads, 3)
    self.assertEqual(fake.evaluated, [('w', ['test'])] * 3)

  def test_metrics_are_floats_of_the_test_data(self):
    hook, _ = self._hook(every=1)
    metrics = hook.evaluate(1, lambda: 'w', last=False)
    self.assertEqual(
        metrics, {'loss': 0.5, 'sparse_categorical_accuracy': 0.75}
    )
    self.assertTrue(all(type(v) is float for v in metrics.values()))  # pylint: disable=unidiomatic-typecheck

  def test_the_model_is_read_only_by_a_hook_that_asks(self):
    # Each read moves the learning state through TFF's executor.
    never = lambda: self.fail('the model was read')
    hook, _ = self._hook(every=2)
    for quiet in (hooks.RunHook(), hook):
      quiet.before_round(never)
      quiet.after_round(never)
    self.assertIsNone(hook.evaluate(1, never, last=False))

  def test_a_hook_evaluates_nothing_by_default(self):
    self.assertIsNone(
        hooks.RunHook().evaluate(5, lambda: self.fail('read'), last=True)
    )


if __name__ == '__main__':
  tf.test.main()
