"""What ZOS's refusals teach: observations, the build's memory lesson and its evidence, the admin's review, the odds
a slice deploys, the probes that would teach most."""
