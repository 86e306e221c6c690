"""The tracelab dashboard (Plotly Dash, one module per page under app/pages)."""

from .main import create_app

__all__ = ["create_app"]
