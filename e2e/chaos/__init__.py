"""The fault suite (``make chaos``): the operator under concurrency, churn, API faults and bad input."""
