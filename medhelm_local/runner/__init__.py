"""The evaluation runner: plan a run, send its requests, commit each response as it arrives."""
