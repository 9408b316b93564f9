"""Prometheus metrics of walog: the histograms both bookies and clients count into."""
