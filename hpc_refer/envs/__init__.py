"""Environments: adapters that give every task the same small interface (see gym_env)."""
