# cudaperf-task: c_image_filter_00c8437d2c47
# best of the run: sample 0, turn 1, runtime_error, reward 0.000
import numpy as np

def filter_sobel(src, dst, ny, nx):
    for i in range(nx):
        for j in range(ny):
            src[i * nx + j * ny + 1] = np.clip(src[i * nx + j * ny + 1], 0, 1.0)
    return dst[i * nx + j * ny + 1]
