"""The streaming node: service, CLI, configuration, telemetry and the local stack."""
