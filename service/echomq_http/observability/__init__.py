"""Metrics, histograms, totals, their exposition, and tracing."""
