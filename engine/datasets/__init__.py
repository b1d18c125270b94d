"""Loading and checking datasets: the layouts that load, their rows, the bounded child that loads uploads."""
