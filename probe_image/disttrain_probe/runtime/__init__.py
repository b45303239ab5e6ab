"""What every phase runs inside: configuration, deadlines and the watchdog, the report, the launcher, the background torch import."""
