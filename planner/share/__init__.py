"""Several plans planned together on one cluster: admission by priority, then growth, then score.

- ``outcome``: what each plan gets back: admitted or why not, each elastic request's cards and
  why it is below its max.
- ``pools``: the plans' requests gathered by the nodes they compete for, a request with a range
  becoming a choice of count as well as of split.
- ``admission``: which plans run, in order, each beside the mins of those before it.
- ``growth``: cards above the mins by priority, then score, then staying put, proven by stages.
- ``answers``: each plan's result read off the joint placement, its grants, or why it was not
  admitted and what it keeps.
- ``joint``: several plans: admission, growth per pool, the answers, the fallbacks.
- ``together``: the entry, :func:`plan_together` (a single fixed plan never loads the rest).
"""
