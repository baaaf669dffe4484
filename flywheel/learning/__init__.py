"""Learning: curation of judged battles into datasets, training, merging, and the allocation of
compute among targets. It reads datasets, not battles being played: it imports no arena."""
