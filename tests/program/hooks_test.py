"""The evaluation hook: when it evaluates, and what it releases."""

import tensorflow as tf

from tff_priv.program import hooks


class _FakeEvaluation:
  """`CentralEvaluation`, reduced to the call the hook makes."""

  def __init__(self):
    self.evaluated = []

  def __call__(self, weights, dataset):
    self.evaluated.append((weights, dataset))
    return {'loss': 0.5, 'sparse_categorical_accuracy': 0.75}


class EvaluationTest(tf.test.TestCase):

  def _hook(self, every):
    hook = hooks.Evaluation(model_fn=None, test_data='test', every=every)
    fake = _FakeEvaluation()
    hook.__dict__['_evaluate'] = fake  # The cached evaluation.
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
    self.assertEqual(fake.evaluated, [('w', 'test')] * 3)

  def test_metrics_are_the_evaluations_of_the_test_data(self):
    hook, fake = self._hook(every=1)
    metrics = hook.evaluate(1, lambda: 'w', last=False)
    self.assertEqual(
        metrics, {'loss': 0.5, 'sparse_categorical_accuracy': 0.75}
    )
    self.assertEqual(fake.evaluated, [('w', 'test')])

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
