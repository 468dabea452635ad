package lockmwtest

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// NewTelemetry returns OpenTelemetry providers whose output a test reads:
// the spans tp ends are in spans, the metrics of mp are read from reader
// (see Collect).
func NewTelemetry() (spans *tracetest.SpanRecorder, tp *sdktrace.TracerProvider, reader *sdkmetric.ManualReader, mp *sdkmetric.MeterProvider) {
	spans = tracetest.NewSpanRecorder()
	reader = sdkmetric.NewManualReader()
	return spans, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), reader, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
}

// Collect returns the metrics reader holds, failing the test if it cannot.
func Collect(t testing.TB, reader *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}
