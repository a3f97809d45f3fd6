"""Test and benchmark support: a scripted Messages API server and a worker-process driver."""
