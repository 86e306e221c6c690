"""Plotly figures and SVG for the dashboard's pages."""
