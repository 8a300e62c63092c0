"""Fleet-scale what-if of drains and upgrades, in virtual time."""
