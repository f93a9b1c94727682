"""Choosing each request's split and nodes: node classes, the greedy placement and its bounds, the
CP-SAT models (OR-Tools is imported only when a model is built)."""
