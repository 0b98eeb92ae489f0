"""suite.compare"""
