"""Integrations with tools outside the engine: pytest (more to come: asyncio, trio, executors)."""
