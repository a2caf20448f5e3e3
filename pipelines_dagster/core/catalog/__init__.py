"""What users configure: workspaces, connectors, pipelines, schedules, retry policies, triggers and templates."""
