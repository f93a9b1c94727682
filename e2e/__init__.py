"""End-to-end tests against a real API server and kube-scheduler (see conftest.py)."""
