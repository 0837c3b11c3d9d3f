"""Asyncio drivers of the protocol cores: TCP peer links (control and bulk
channels, authenticated frames), the MQTT client, the clock, the HTTP API and
the control/worker process split.  Turns actions into I/O and I/O into events.
"""
