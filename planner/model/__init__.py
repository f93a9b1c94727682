"""The planner's values: a plan spec and the cluster snapshot it is planned on, the options each
request has, devices and NUMA zones as domains, and the result with its reasons."""
