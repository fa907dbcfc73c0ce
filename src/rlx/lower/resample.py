"""Resampling lowerings: upsampling (nearest, linear, bicubic, antialiased), pixel (un)shuffle, grid_sample."""
