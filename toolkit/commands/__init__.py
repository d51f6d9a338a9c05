"""CLI commands: each a request builder and a printer, registered and run by toolkit.app's `@command`."""
