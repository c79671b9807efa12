"""Why a kernel wastes the chip: static diagnosis, Nsight Compute, predictions, reports, plots."""
