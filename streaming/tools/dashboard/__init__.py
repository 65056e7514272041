"""``faultline dashboard``: a live web page over a job's Delta tables.

:mod:`streaming.tools.dashboard.data` reads the tables incrementally, by Delta version, into
per-minute rollups (no Dash import, tested without a browser); :mod:`streaming.tools.dashboard.app`
lays them out with Dash and Plotly and serves them; :mod:`streaming.tools.dashboard.screenshot`
takes the README's picture of it from a real run in headless Chromium.
"""
