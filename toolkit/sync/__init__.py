"""The sync stage: upstream git -> vendor/ + vendor/UPSTREAM (the lock). stage.py is the entry point."""
