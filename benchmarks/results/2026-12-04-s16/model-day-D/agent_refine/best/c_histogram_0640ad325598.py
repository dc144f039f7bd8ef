# cudaperf-task: c_histogram_0640ad325598
# best of the run: sample 0, turn 1, invalid_solution, reward 0.000
def histogram(x, y, a, n):
    for i in range(n):
        y[i] = a * x[i]
    return (x, y, a, n)
