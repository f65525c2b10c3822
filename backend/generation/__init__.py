"""Generation: penalties, sampling, constraints, reasoning budget, speculation, stops, detokenization."""
