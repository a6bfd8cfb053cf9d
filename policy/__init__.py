"""The project's policy pack (pulumi-policy): guardrails every preview and update runs."""
