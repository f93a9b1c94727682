"""Words every layer of the planner shares: API names and label keys, the strategy table, typed
outcome codes, the input error, Kubernetes quantities. Nothing here imports the rest."""
