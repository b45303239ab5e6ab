"""What every phase runs inside: one probe run and what it keeps, its configuration, deadlines
and the watchdog, the report, the launcher, several local ranks as local rank 0 sees them, the
background torch import."""
