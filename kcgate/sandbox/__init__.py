"""What runs beside the kernel: the sandbox process, one fresh child per case, and the judge's remote calls into it."""
