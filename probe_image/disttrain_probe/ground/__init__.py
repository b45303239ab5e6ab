"""The probe's ground floor: what every room stands on and nothing it builds on. The
configuration and the launcher that filled it, deadlines and the watchdog, what a run keeps
(typed results), the background torch import, and the rank layout with a local rank's
outcome. Imports only ``contract``."""
