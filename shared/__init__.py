"""Scheduler Agent Supervisor order pipeline: the domain, the adapters and the handlers."""
