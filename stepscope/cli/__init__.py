"""The `stepscope` command: `analyze`, `diff`, `artifacts`, and plugins such as `dev`."""
