"""gpuplan's load tester: how much can one instance of a service take, and how does it scale?

The planner's strategies (``machine`` concentrates an IO-bound service, ``service`` spreads a
compute-bound one) rest on knowing which kind a service is, decided partly from performance
tests; this package is those tests, rebuilt:

* ``run`` - constant-rate open-loop load from several sender processes and a capacity search
  (:mod:`loadtest.search`) that reports the highest rate the service *holds* (errors <= 1%,
  backlog not growing), and whether the knee is the server's or the sender's;
* ``merge`` - the results of shards (an Indexed Job's pods) combined exactly;
* ``classify`` - capacities at 1 and several instances -> ``keyStrategy`` with the evidence;
* ``compare`` - a plan and per-instance capacities -> the three allocation strategies side by side;
* ``sample-server`` - a service with a known knee, CPU- or IO-bound, to test all of the above.

Unlike :mod:`planner`, this package does I/O by design; the planner never imports it.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
