"""suite.launch.ray.launcher"""
