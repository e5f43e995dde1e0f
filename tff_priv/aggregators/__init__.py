"""TFF aggregation factories that wire tff_priv's mechanisms into AggregationProcesses."""
