"""tune.py's commands: argument parsing and what is printed."""
