"""Results of two commits -> a diff with a category per case -> a gate decision; across runners, a comparison.
Torch-free."""
