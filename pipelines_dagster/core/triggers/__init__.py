"""What fires runs: webhook intake, the event inbox, fires taken by sensors, and the schedule claimer."""
