// CUDA C versions of offload's example kernels: the baselines the GPU
// benchmarks (`offload bench --device cuda`) compare the PTX backend with.
// `scripts/cuda-baselines` compiles this file with NVRTC (the nvcc front end
// as a library) into `baselines.ptx`, which is checked in so the benchmark
// machine needs nothing but a driver; the ordinary test run assembles that
// PTX with ptxas and checks it is up to date with this file.
//
// Compiled with --fmad=false so float arithmetic rounds like offload's
// (every kernel but blackscholes must give bit-identical results; CUDA's
// expf/logf are not the host libm, so blackscholes is compared within 1e-4).
// One thread per workitem, grid-stride loops; same memory layouts as offload.

extern "C" __global__ void saxpy(long n, float a, const float *x, float *y) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        y[i] = a * x[i] + y[i];
    }
}

extern "C" __global__ void mandelbrot(long n, int w, int h, int max_iter, int *out) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        int p = (int)i;
        float cx = ((float)(p % w) * 3.0f) / (float)w + -2.0f;
        float cy = ((float)(p / w) * 3.0f) / (float)h + -1.5f;
        float zx = 0.0f, zy = 0.0f;
        int k = 0;
        while (k < max_iter) {
            if (zx * zx + zy * zy > 4.0f) break;
            float t = zx * zx - zy * zy + cx;
            zy = 2.0f * zx * zy + cy;
            zx = t;
            k++;
        }
        out[p] = k;
    }
}

extern "C" __global__ void nbody(long n, int nb, float dt, float eps2,
                                 const float *px, const float *py, const float *pz, const float *m,
                                 float *vx, float *vy, float *vz) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        int b = (int)i;
        float ax = 0.0f, ay = 0.0f, az = 0.0f;
        for (int j = 0; j < nb; j++) {
            float dx = px[j] - px[b];
            float dy = py[j] - py[b];
            float dz = pz[j] - pz[b];
            float s = dx * dx + dy * dy + dz * dz + eps2;
            s = m[j] / (s * __fsqrt_rn(s));
            ax += dx * s;
            ay += dy * s;
            az += dz * s;
        }
        vx[b] += dt * ax;
        vy[b] += dt * ay;
        vz[b] += dt * az;
    }
}

extern "C" __global__ void matmul(long n, int dim, const float *a, const float *b, float *c) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        int row = (int)i / dim, col = (int)i % dim;
        float acc = 0.0f;
        for (int k = 0; k < dim; k++) acc += a[row * dim + k] * b[k * dim + col];
        c[i] = acc;
    }
}

extern "C" __global__ void histogram(long n, const int *data, int *bins, int nbins) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        atomicAdd(&bins[(data[i] & 0x7fffffff) % nbins], 1);
    }
}

__device__ float cnd(float d) {
    float k = 1.0f / (1.0f + 0.2316419f * fabsf(d));
    float poly = ((((k * 1.330274429f + -1.821255978f) * k + 1.781477937f) * k + -0.356563782f) * k
                  + 0.31938153f) * k;
    float w = 1.0f - poly * 0.3989422804f * expf(d * d * -0.5f);
    return d < 0.0f ? 1.0f - w : w;
}

extern "C" __global__ void blackscholes(long n, float r, float v, const float *s, const float *x,
                                        const float *t, float *call, float *put) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float sqt = __fsqrt_rn(t[i]);
        float d1 = (logf(s[i] / x[i]) + (v * v * 0.5f + r) * t[i]) / (v * sqt);
        float d2 = d1 - v * sqt;
        float disc = x[i] * expf(-r * t[i]);
        call[i] = s[i] * cnd(d1) - disc * cnd(d2);
        put[i] = disc * (1.0f - cnd(d2)) - s[i] * (1.0f - cnd(d1));
    }
}

// The allocation benchmark's kernel (examples/kernels/alloc.obc) with CUDA's
// device-side malloc/free in place of offload's TLAB allocation: every Vec3
// is a fresh heap object, as there.
struct Vec3 { double x, y, z; };

__device__ Vec3 *vec3(double x, double y, double z) {
    Vec3 *v = (Vec3 *)malloc(sizeof(Vec3));
    if (v) { v->x = x; v->y = y; v->z = z; }
    return v;
}

extern "C" __global__ void alloc_vectors(long n, int count, double *out, int *failed) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        Vec3 *sum = vec3(0.0, 0.0, 0.0);
        for (int k = 0; k < count && sum; k++) {
            Vec3 *v = vec3((double)i + (double)k, (double)k, 1.0);
            if (!v) { free(sum); sum = 0; break; }
            Vec3 *s = vec3(sum->x + v->x, sum->y + v->y, sum->z + v->z);
            free(v);
            free(sum);
            sum = s;
        }
        if (!sum) { atomicAdd(failed, 1); continue; }
        out[i] = __dsqrt_rn(sum->x * sum->x + sum->y * sum->y + sum->z * sum->z);
        free(sum);
    }
}
