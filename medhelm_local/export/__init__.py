"""Reports that leave the appliance: aggregates only."""
