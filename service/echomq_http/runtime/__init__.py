"""What runs in the background of a process: the sweep, wake-ups, event feeds."""
