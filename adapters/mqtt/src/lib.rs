//! The `mqtt` source and output: signals to and from an MQTT broker (mosquitto, Home
//! Assistant's, EMQX, …), the bus of microcontrollers and home automation: an ESP32
//! button in, a status lamp out.
//!
//! The source subscribes to topic filters (`+`, `#`) and makes each message a signal: a
//! JSON envelope (`payload = "envelope"`, the default) or, whatever its bytes,
//! `mqtt.message {topic, payload}` (`payload = "raw"`). The output publishes each signal
//! on a topic made from a template (`agents/{payload.agentId}/state`), its envelope or one
//! raw value, retained if asked.
//!
//! MQTT 3.1.1 and 5, `mqtt://` and `mqtts://` (rustls with the ring provider, the system's
//! roots plus `ca_file`), user and password or a token. QoS 0 or 1 (default 1). At QoS 1
//! nothing acknowledged is lost: the source acknowledges a message only after the graph
//! took its signal (with a persistent session, the default, the broker keeps what arrives
//! while patchbay is away), and the output counts a signal as sent only once the broker
//! acknowledged it and publishes what was unacknowledged again after a reconnect. MQTT has
//! no deduplication: a message whose acknowledgement a broken connection cut may arrive
//! twice (counted: `mqtt_resent`, `mqtt_redelivered`; marked `metadata.mqtt.redelivered`).
//!
//! Layout: [`topic`] (filters, matching, templates) and [`decode`] (message bytes ↔
//! signals) are pure, as is [`codec`] (MQTT packets, over rumqttc's codecs); `link` is
//! the session over the transport crate's reconnect loop. Passwords and tokens never
//! appear in logs, errors or health.

pub mod codec;
pub mod config;
pub mod decode;
mod link;
pub mod topic;

use patchbay_graph::{
    Adapter, BoxFuture, ComponentError, ComponentStats, ComponentType, Diagnostic, LinkEnds,
    Options, Output, OutputContext, Source, SourceContext, options_of,
};
use patchbay_transport::Driver;

pub use config::{Connection, MqttOutputConfig, MqttSourceConfig};
pub use decode::{Message, MessageDecoder, MessageEncoder, PayloadMode, RAW_TYPE};
pub use topic::{TopicFilter, TopicTemplate};

/// The MQTT source and output, described for the registry and `patchbay components`.
pub const ADAPTER: Adapter = Adapter::new(
    "mqtt",
    "an MQTT broker (3.1.1 and 5): microcontrollers, home automation, status lamps",
    &[
        ComponentType::source(
            "mqtt",
            "subscribe to MQTT topics (+, #): envelopes or raw `mqtt.message` (QoS 1: acked once taken)",
            build_source,
            options_of::<MqttSourceConfig>,
        ),
        ComponentType::output(
            "mqtt",
            "publish signals on MQTT topics from a template, retained if asked (QoS 1: sent once acked)",
            build_output,
            options_of::<MqttOutputConfig>,
        ),
    ],
);

fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(MqttSource {
        config: config::parse_source(options)?,
    }))
}

fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let (config, value) = config::parse_output(options)?;
    let encoder = MessageEncoder::new(config.payload, value);
    Ok(Box::new(MqttOutput { config, encoder }))
}

struct MqttSource {
    config: MqttSourceConfig,
}

impl Source for MqttSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let transport = self.config.connection.transport();
            let mut link = link::SourceLink::new(self.config, &cx);
            let ended = Driver::new("mqtt", &transport, LinkEnds::source(&cx))
                .run(&mut link)
                .await;
            link::stopped(cx.stats());
            ended
        })
    }
}

struct MqttOutput {
    config: MqttOutputConfig,
    encoder: MessageEncoder,
}

impl Output for MqttOutput {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let transport = self.config.connection.transport();
            let mut link = link::OutputLink::new(self.config, self.encoder, &cx);
            let ended = Driver::new("mqtt", &transport, LinkEnds::output(&cx))
                .run(&mut link)
                .await;
            // Stopped while the broker was away (or failed): what was taken and never
            // acknowledged did not reach the broker for sure.
            let unfinished = link.unfinished() as u64;
            if unfinished > 0 {
                tracing::warn!(
                    output = cx.name(),
                    "MQTT: {unfinished} signal(s) not acknowledged by the broker when the output ended (counted as dropped)"
                );
                ComponentStats::add(&cx.stats().dropped, unfinished);
            }
            link::stopped(cx.stats());
            ended
        })
    }
}
