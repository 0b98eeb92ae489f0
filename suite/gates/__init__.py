"""suite.gates"""
