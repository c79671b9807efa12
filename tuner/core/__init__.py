"""The problem, the device and the values every stage shares; imports nothing else of the tuner."""
