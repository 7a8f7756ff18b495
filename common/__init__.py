"""What qscan and qreplay share that is neither the pure core (tparams) nor the lab:
the command-line plumbing, the console, and where parameter-set files live."""
