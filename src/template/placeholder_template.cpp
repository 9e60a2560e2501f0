// Placeholder; replaced as the area is built.
