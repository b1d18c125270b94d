"""Pure statistics over stored numbers: intervals and tests, CAS and CAB, paired comparison, the citation choice model and its simulation."""
