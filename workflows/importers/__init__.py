"""Importers: datasets (FlowBench, STAR, SGD) -> PDL library trees."""
