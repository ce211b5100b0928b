raise ImportError("fast_hadamard_transform hidden for this run")
