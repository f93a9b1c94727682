"""One scheduling cycle for the cluster (the ``framework/`` session of kube-batch and Volcano).

Notes
-----
:mod:`.order` (pure) says in which order plans are admitted and what a plan's inputs are;
:mod:`.session` runs one cycle on one snapshot of the caches: every plan whose spec or inputs
changed is planned, in admission order, its writes computed and performed, its status written;
:mod:`.sweep` (pure) finds node labels of plans gone without their clean-up;
:mod:`.loop` wakes the cycle when a watch reports a change that matters, after the burst settles.
"""
